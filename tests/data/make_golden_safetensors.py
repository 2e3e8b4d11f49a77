# tests/data/make_golden_safetensors.py: writes golden.safetensors with the official `safetensors`
# package, so that tests/nn/test_safetensors.cpp checks ringgrad against the reference writer.
#
# Run once, by hand (not a test dependency); golden.safetensors is committed. It was made with
# safetensors 0.8.0 and torch 1.13 (Debian's python3-torch) under /usr/bin/python3:
#   python3 -m venv --system-site-packages /tmp/st && /tmp/st/bin/pip install safetensors
#   cd tests/data && /tmp/st/bin/python make_golden_safetensors.py
# The writer keeps metadata in a hash map, so a rerun may order the two metadata entries
# differently (same content, different bytes). The values are chosen to catch byte-order and
# conversion mistakes: extremes, a denormal, -0.0.
import safetensors
import torch
from safetensors.torch import save_file

tensors = {
    "f32": torch.tensor([[0.0, 1.5, -2.25], [3.4028235e38, 1e-45, -0.0]], dtype=torch.float32),
    "f64": torch.tensor([1.0 / 3.0, -1e300, 5e-324], dtype=torch.float64),
    "i64": torch.tensor([[0, -1], [2**62, -2**63]], dtype=torch.int64),
    "u8": torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8),
    "bf16": torch.tensor([1.0, -2.5, 0.0078125, 65280.0], dtype=torch.bfloat16),
    "scalar": torch.tensor(7.0, dtype=torch.float32),
    "empty": torch.zeros((0, 3), dtype=torch.float32),
}
save_file(tensors, "golden.safetensors",
          metadata={"format": "pt", "producer": "safetensors " + safetensors.__version__})
