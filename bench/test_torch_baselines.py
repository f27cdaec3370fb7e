"""The plain PyTorch step of bench/torch_baselines.py computes the Drama-3 backbone step: on a
tiny random checkpoint (the reference's own writer, no shared expert), float32 on the CPU, its
rows equal the reference model's (tools/reference/drama3.py) token by token, and the step
reads only its own row's cache. Run: /usr/bin/python3 bench/test_torch_baselines.py"""

import copy
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools", "reference"))

import drama3  # noqa: E402
import test_reference  # noqa: E402
import torch_baselines  # noqa: E402


def weights_from_reference(ref):
    layers = []
    for layer in ref.backbone.layers:
        a, m = layer.attn, layer.mlp
        L = {"ln1": layer.input_norm, "ln2": layer.post_attn_norm, "q_norm": a.q_norm, "k_norm": a.k_norm,
             "wqkv": torch.cat([a.q, a.k, a.v]), "wo": a.o}
        if isinstance(m, drama3.MoeMlp):
            L["router"] = m.router
            L["gate_up"] = torch.stack([torch.cat([e.gate, e.up]) for e in m.experts])
            L["down"] = torch.stack([e.down for e in m.experts])
        else:
            L["gate_up"], L["down"] = torch.cat([m.gate, m.up]), m.down
        layers.append(L)
    return layers, ref.backbone.norm


class PlainStep(unittest.TestCase):
    def test_rows_equal_the_reference_token_by_token(self):
        config = copy.deepcopy(test_reference.TINY_CONFIG)
        config["backbone"]["moe"]["shared_expert_intermediate_size"] = 0
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ck")
            test_reference.write_checkpoint(path, config, test_reference.random_weights(config, 5),
                                            use_nvfp4=False)
            ref = drama3.Drama3(path)
        h, steps = config["backbone"]["hidden_size"], 6
        g = torch.Generator().manual_seed(9)
        xs = torch.randn(2, steps, h, generator=g)
        want = []
        for row in range(2):  # each row alone through the reference, one position at a time
            cache = ref.backbone.new_cache()
            want.append(torch.stack([ref.run_backbone(xs[row, t:t + 1], cache)[0] for t in range(steps)]))
        step = torch_baselines.PlainStep(config, "cpu", 2, steps + 2, dtype=torch.float32,
                                         weights=weights_from_reference(ref))
        with torch.no_grad():
            for t in range(steps):
                step.pos.fill_(t)
                step.x.copy_(xs[:, t])
                got = step.forward()
                for row in range(2):
                    err = (got[row] - want[row][t]).norm() / want[row][t].norm()
                    self.assertLess(float(err), 1e-5, f"position {t} row {row}")


if __name__ == "__main__":
    unittest.main()
