"""Runs docs/python.md's python blocks as written, against a daemon serving MODEL_DIR (set up by gpu-docs-check.sh),
with the release's Python package (ENGRAM_PY: its directory)."""
import json, os, re, sys
sys.path.insert(0, os.environ.get("ENGRAM_PY", "python"))
doc = open("docs/python.md").read()
blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
print(f"{len(blocks)} python blocks")
for i, code in enumerate(blocks):
    print(f"== block {i}: {code.splitlines()[0]} ... ({len(code.splitlines())} lines)", flush=True)
    ns = {"__name__": f"block{i}"}
    exec(compile(code, f"docs/python.md block {i}", "exec"), ns)
    if "engram_rows" in ns:
        import torch, safetensors.torch
        model = ns["MODEL_DIR"]
        ref = {}
        for f in os.listdir(model):
            if f.endswith(".safetensors"):
                ref.update(safetensors.torch.load_file(os.path.join(model, f)))
        w, s = ns["weight"], ns["scale"]
        print("weight", w.dtype, tuple(w.shape), w.device, "scale", s.dtype, tuple(s.shape), s.device)
        assert torch.equal(w.view(torch.uint8).cpu(), ref["layers.1.engram.embed.weight"].view(torch.uint8))
        assert torch.equal(s.view(torch.uint8).cpu(), ref["layers.1.engram.embed.scale"].view(torch.uint8))
        hashes = torch.randint(0, 1 << 40, (1000, 24), device="cuda:0")
        out = ns["engram_rows"](hashes)
        ids = torch.remainder(hashes, ns["rows"]).reshape(-1).cpu()
        rw = ref["layers.1.engram.embed.weight"][ids].float().view(-1, 8, 32)
        rs = ref["layers.1.engram.embed.scale"][ids].float().unsqueeze(-1)
        want = (rw * rs).view(1000, 24, 256).to(torch.bfloat16)
        print("engram_rows", out.dtype, tuple(out.shape), out.device)
        assert out.shape == (1000, 24, 256) and out.dtype == torch.bfloat16
        # random bytes hold NaN codes (F8_E4M3 0x7F/0xFF, E8M0 0xFF), whose payloads a GPU and a CPU may write
        # differently: equal values, NaN where the other has NaN
        torch.testing.assert_close(out.cpu(), want, rtol=0, atol=0, equal_nan=True, msg="the lookup differs")
        ns["imported"].close()
        del w, s, out
        ns.clear()
        print("engine example: lookup equal to the files' bytes dequantised")
print("DOCS OK")
