import sys

from invfast.cli import main

sys.exit(main())
