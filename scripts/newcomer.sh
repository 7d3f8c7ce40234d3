#!/usr/bin/env bash
# A newcomer's first hour, timed step by step (issue 62): the README's quick start, one's own torchvision-layout
# checkpoint on one's own photographs, other libraries' models by name (timm, Hugging Face: skipped with a line
# where the package is missing), features -> probe, and compare. Run from a clean clone:
#
#     bash scripts/newcomer.sh [WORKDIR]      # default: runs/newcomer (git-ignored)
#
# Prints each step's command, exit code and seconds; the output of a run is in docs/newcomer.md.
set -uo pipefail
cd "$(dirname "$0")/.."
W=${1:-runs/newcomer}
mkdir -p "$W"
PY=.venv/bin/python
IV=.venv/bin/invfast
FAILED=0

step() {  # step NAME COMMAND...: run it, print rc and seconds, keep its output in $W/NAME.log
    local name=$1; shift
    local t0; t0=$(date +%s%N)
    "$@" >"$W/$name.log" 2>&1
    local rc=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    printf '%-20s rc=%d %6d.%d s   %s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000 / 100)) "$*"
    [ "$rc" -eq 0 ] || { FAILED=1; tail -3 "$W/$name.log" | sed 's/^/    | /'; }
}

skip() { printf '%-20s skipped: %s\n' "$1" "$2"; }

[ -x "$IV" ] || step setup bash scripts/setup.sh
step quick-start "$IV" measure --quick --model resnet18-cifar --data synthetic: --out "$W/quick/" --no-progress --overwrite

# one's own photographs (scikit-image's, cut into 160-px patches in two class folders, plus a stray README.txt)
# and one's own checkpoint in torchvision's layout
step make-inputs "$PY" - "$W" <<'EOF'
import os, sys
import numpy as np, torch
from PIL import Image
from skimage import data
import invfast.models as m
w = sys.argv[1]
rng = np.random.default_rng(0)
for cls, names in {"animals": ["chelsea", "cat", "coffee"], "scenes": ["astronaut", "rocket", "immunohistochemistry"]}.items():
    os.makedirs(f"{w}/photos/{cls}", exist_ok=True)
    for name in names:
        img = getattr(data, name)()
        for k in range(6):
            y, x = (int(rng.integers(0, s - 160)) for s in img.shape[:2])
            Image.fromarray(img[y:y + 160, x:x + 160]).save(f"{w}/photos/{cls}/{name}-{k}.png")
open(f"{w}/photos/README.txt", "w").write("photographs from scikit-image\n")
torch.manual_seed(0)
torch.save(m.to_torchvision_state_dict(m.create("resnet18", num_classes=1000)), f"{w}/r18_tv.pth")
EOF
step own-model "$IV" measure --quick --model resnet18 --checkpoint "$W/r18_tv.pth" --data "folder:$W/photos" \
    --crop 224 --out "$W/own/" --no-progress --overwrite
if "$PY" -c "import timm" 2>/dev/null; then
    step timm-by-name "$IV" measure --quick --model timm:resnet18 --data "folder:$W/photos" --out "$W/timm/" \
        --no-progress --overwrite
else
    skip timm-by-name "timm is not importable here (pip install timm, keeping this torch)"
fi
if "$PY" -c "import transformers" 2>/dev/null; then
    step hf-model-folder "$PY" -c "
from transformers import AutoModel, ViTConfig, ViTImageProcessor
cfg = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
AutoModel.from_config(cfg).save_pretrained('$W/hf-vit'); ViTImageProcessor().save_pretrained('$W/hf-vit')"
    step hf-by-name "$IV" measure --quick --model "hf:$W/hf-vit" --data "folder:$W/photos" --out "$W/hf/" \
        --no-progress --overwrite
else
    skip hf-by-name "transformers is not importable here (pip install transformers)"
fi
step features "$IV" features --model resnet18 --checkpoint "$W/r18_tv.pth" --data "folder:$W/photos" --crop 224 \
    --out "$W/feats.npy" --no-progress --overwrite
step probe "$IV" probe --features "$W/feats.npy" --targets "$W/feats.labels.npy" --task classification --no-progress
# compare runs on the same images: one's own checkpoint against the same architecture at random weights
step random-init "$IV" measure --quick --model resnet18 --data "folder:$W/photos" --crop 224 --out "$W/random/" \
    --no-progress --overwrite
step compare "$IV" compare "own=$W/own/" "random=$W/random/" --out "$W/cmp/" --overwrite
exit $FAILED
