#!/usr/bin/env python3
"""examples/gpt/torch_gpt.py: the same GPT in PyTorch, loading a checkpoint examples/gpt wrote.

    build/examples/gpt --steps 300 --save gpt.safetensors
    /usr/bin/python3 examples/gpt/torch_gpt.py --load gpt.safetensors --heads 4

reads the corpus as the C++ program does (the same files, the same 90/10 split), builds the model of
examples/gpt/model.h with torch.nn (nanoGPT's layout: the output layer is the token embedding's
table), loads the weights from the safetensors file, and prints the held-out loss on the same fixed
windows as the C++ program's final "held-out loss" line. The two must agree to float32 rounding:
the checkpoint means the same model in both.

The sizes (layers, width, context) are read from the checkpoint's shapes; the number of heads is not
in it, so --heads must match the run's. Needs only torch and the standard library (the safetensors
file is parsed here: an 8-byte header length, a JSON header, raw little-endian tensors).
"""
import argparse
import json
import math
import os
import struct
import sys


def read_corpus(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if not n.endswith(".dat") and not os.path.islink(os.path.join(path, n))
                       and os.path.isfile(os.path.join(path, n)))
        return b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    return open(path, "rb").read()


def load_safetensors(torch, path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=dtypes[info["dtype"]]).reshape(info["shape"]).clone()
    return out


def build_model(torch, layers, width, heads, context, vocab=256):
    nn = torch.nn
    F = torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(width, 3 * width)
            self.c_proj = nn.Linear(width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(c // heads)
            # Made on x's device (not a buffer: gloo cannot broadcast a bool buffer for DDP).
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(future, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(width, 4 * width)
            self.c_proj = nn.Linear(4 * width, width)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(context, width)
            self.h = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(width)

        def forward(self, tokens):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.ln_f(self.h(self.wte(tokens) + self.wpe(pos)))
            return x @ self.wte.weight.t()  # tied, as in model.h

    return Gpt()


def held_out_loss(torch, model, val, context, batch_size, eval_batches):
    """The C++ program's held_out_loss: eval_batches batches of windows at evenly spaced starts."""
    span = len(val) - context - 1
    total = 0.0
    with torch.no_grad():
        for b in range(eval_batches):
            starts = [span * (b * batch_size + r) // (eval_batches * batch_size) for r in range(batch_size)]
            x = torch.tensor([list(val[s:s + context]) for s in starts], dtype=torch.int64)
            y = torch.tensor([list(val[s + 1:s + 1 + context]) for s in starts], dtype=torch.int64)
            logits = model(x)
            total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    return total / eval_batches


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--load", required=True, help="the safetensors file examples/gpt --save wrote")
    p.add_argument("--heads", type=int, default=4, help="attention heads of the run (not stored in the file)")
    p.add_argument("--data", default="/usr/share/games/fortunes", help="the run's --data")
    p.add_argument("--batch-size", type=int, default=16, help="the run's --batch-size")
    p.add_argument("--eval-batches", type=int, default=16, help="the run's --eval-batches")
    p.add_argument("--expect", type=float, help="the C++ program's held-out loss: exit 1 unless within --tolerance")
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest |difference| --expect accepts")
    args = p.parse_args()
    try:
        import torch
    except Exception as e:
        print("torch_gpt: cannot import torch with %s: %s" % (sys.executable, str(e).splitlines()[0]))
        return 0 if args.expect is None else 77  # 77: skipped (CTest's SKIP_RETURN_CODE)
    torch.set_num_threads(1)
    state = load_safetensors(torch, args.load)
    context, width = state["wpe.weight"].shape
    layers = len({k.split(".")[1] for k in state if k.startswith("h.")})
    model = build_model(torch, layers, width, args.heads, context)
    model.load_state_dict(state, strict=True)  # every name and shape must match model.h's
    model.eval()
    corpus = read_corpus(args.data)
    val = corpus[len(corpus) * 9 // 10:]
    loss = held_out_loss(torch, model, val, context, args.batch_size, args.eval_batches)
    print("torch_gpt: %d layers, width %d, %d heads, context %d; held-out loss %.6f" % (layers, width, args.heads, context, loss))
    if args.expect is not None:
        diff = abs(loss - args.expect)
        print("torch_gpt: ringgrad's held-out loss %.6f, difference %.2e (tolerance %.0e)" % (args.expect, diff, args.tolerance))
        return 0 if diff <= args.tolerance else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
