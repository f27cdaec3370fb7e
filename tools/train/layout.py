"""Tensor names and shapes of a Drama-3 checkpoint (spec section 4) and of its Mimi codec (Hugging
Face MimiModel names, as tools/reference/mimi.py reads them), from the configs, with the initial
values training starts from. tests/train (test_train_smoke) checks these layouts against the
tensors `drama make-checkpoint` writes for the same config.

    drama3_layout(config) -> [(name, shape, init)]     init: ("normal", std) | ("ones",) | ("zeros",)
    mimi_layout(codec)    -> [(name, shape, init)]     codec: the Mimi config dict
"""

import math


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


def _layer(p, t, layers):
    h, q, kv = t["hidden_size"], t["num_heads"] * t["head_dim"], t["num_kv_heads"] * t["head_dim"]
    residual = 1.0 / math.sqrt(2.0 * layers)
    return [(f"{p}.input_norm.weight", [h], ("ones",)),
            (f"{p}.attn.q_proj.weight", [q, h], ("normal", 1 / math.sqrt(h))),
            (f"{p}.attn.k_proj.weight", [kv, h], ("normal", 1 / math.sqrt(h))),
            (f"{p}.attn.v_proj.weight", [kv, h], ("normal", 1 / math.sqrt(h))),
            (f"{p}.attn.o_proj.weight", [h, q], ("normal", residual / math.sqrt(q))),
            (f"{p}.attn.q_norm.weight", [t["head_dim"]], ("ones",)),
            (f"{p}.attn.k_norm.weight", [t["head_dim"]], ("ones",)),
            (f"{p}.post_attn_norm.weight", [h], ("ones",))]


def _mlp(p, h, inter, layers):
    return [(f"{p}.gate_proj.weight", [inter, h], ("normal", 1 / math.sqrt(h))),
            (f"{p}.up_proj.weight", [inter, h], ("normal", 1 / math.sqrt(h))),
            (f"{p}.down_proj.weight", [h, inter], ("normal", 1 / math.sqrt(2.0 * layers * inter)))]


def drama3_layout(config):
    b, t, a = config["backbone"], config["tower"], config["audio"]
    moe = b["moe"]
    h, ht, k, cs = b["hidden_size"], t["hidden_size"], a["num_codebooks"], a["codebook_size"]
    out = [("text_embed.weight", [config["text"]["vocab_size"], h], ("normal", 1.0)),
           ("audio_embed.weight", [k * (cs + 1), h], ("normal", 1 / math.sqrt(k)))]
    for l in range(b["num_layers"]):
        p = f"backbone.layers.{l}"
        out += _layer(p, b, b["num_layers"])
        if l in moe.get("dense_layers", [0]):
            out += _mlp(p + ".mlp", h, b["intermediate_size"], b["num_layers"])
            continue
        out.append((p + ".mlp.router.weight", [moe["num_experts"], h], ("normal", 1 / math.sqrt(h))))
        for e in range(moe["num_experts"]):
            out += _mlp(f"{p}.mlp.experts.{e}", h, moe["expert_intermediate_size"], b["num_layers"])
        if moe.get("shared_expert_intermediate_size", 0) > 0:
            out += _mlp(p + ".mlp.shared_expert", h, moe["shared_expert_intermediate_size"],
                        b["num_layers"])
            out.append((p + ".mlp.shared_expert_gate.weight", [1, h], ("normal", 1 / math.sqrt(h))))
    out.append(("backbone.norm.weight", [h], ("ones",)))
    out.append(("codebook0_head.weight", [cs + 1, h], ("normal", 1 / math.sqrt(h))))
    out.append(("tower.input_proj.weight", [ht, h], ("normal", 1 / math.sqrt(h))))
    for l in range(t["num_layers"]):
        out += _layer(f"tower.layers.{l}", t, t["num_layers"])
        out += _mlp(f"tower.layers.{l}.mlp", ht, t["intermediate_size"], t["num_layers"])
    out.append(("tower.norm.weight", [ht], ("ones",)))
    out.append(("tower.heads.weight", [k - 1, cs, ht], ("normal", 1 / math.sqrt(ht))))
    return out


def resample_kernel(c):
    hop = _prod(c["upsampling_ratios"])
    encodec_rate = math.ceil(c["sampling_rate"] / hop)
    return 2 * int(encodec_rate / (c["sampling_rate"] / (2 * hop)))


def mimi_layout(c):
    """Every MimiModel tensor for codec config c (float32), numbered as HF numbers its layers."""
    out = []

    def conv(p, cin, cout, k, bias=True, gain=1.0):
        out.append((p + ".conv.weight", [cout, cin, k], ("normal", gain / math.sqrt(cin * k))))
        if bias:
            out.append((p + ".conv.bias", [cout], ("zeros",)))

    def conv_t(p, cin, cout, k, stride, groups, bias=True):
        out.append((p + ".conv.weight", [cin, cout // groups, k],
                    ("normal", 1 / math.sqrt(cin // groups * k / stride))))
        if bias:
            out.append((p + ".conv.bias", [cout], ("zeros",)))

    def resnet(p, dim):
        conv(p + ".block.1", dim, dim // c.get("compress", 2), c.get("residual_kernel_size", 3))
        conv(p + ".block.3", dim // c.get("compress", 2), dim, 1, gain=0.5)

    def transformer(p):
        h, q = c["hidden_size"], c["num_attention_heads"] * c["head_dim"]
        kv = c["num_key_value_heads"] * c["head_dim"]
        for l in range(c["num_hidden_layers"]):
            lp = f"{p}.layers.{l}"
            for name, shape in ((".self_attn.q_proj", [q, h]), (".self_attn.k_proj", [kv, h]),
                                (".self_attn.v_proj", [kv, h]), (".self_attn.o_proj", [h, q]),
                                (".mlp.fc1", [c["intermediate_size"], h]),
                                (".mlp.fc2", [h, c["intermediate_size"]])):
                out.append((lp + name + ".weight", shape, ("normal", 1 / math.sqrt(shape[1]))))
            for norm in (".input_layernorm", ".post_attention_layernorm"):
                out.append((lp + norm + ".weight", [h], ("ones",)))
                out.append((lp + norm + ".bias", [h], ("zeros",)))
            for scale in (".self_attn_layer_scale.scale", ".mlp_layer_scale.scale"):
                out.append((lp + scale, [h], ("constant", c.get("layer_scale_initial_scale", 0.01))))

    def quantizer(p, layers):
        dim = c["vector_quantization_hidden_dimension"]
        for i in range(layers):
            cb = f"{p}.layers.{i}.codebook"
            out.append((cb + ".initialized", [1], ("ones",)))
            out.append((cb + ".cluster_usage", [c["codebook_size"]], ("ones",)))
            out.append((cb + ".embed_sum", [c["codebook_size"], c["codebook_dim"]], ("normal", 1.0)))
        if c["hidden_size"] != dim:  # MimiConfig: projections only when the sizes differ
            out.append((p + ".input_proj.weight", [dim, c["hidden_size"], 1],
                        ("normal", 1 / math.sqrt(c["hidden_size"]))))
            out.append((p + ".output_proj.weight", [c["hidden_size"], dim, 1],
                        ("normal", 1 / math.sqrt(dim * max(layers, 1)))))

    nf, ratios, idx, scale = c["num_filters"], c["upsampling_ratios"], 0, 1
    conv(f"encoder.layers.{idx}", c.get("audio_channels", 1), nf, c["kernel_size"])
    idx += 1
    for ratio in reversed(ratios):
        dim = scale * nf
        for _ in range(c.get("num_residual_layers", 1)):
            resnet(f"encoder.layers.{idx}", dim)
            idx += 1
        idx += 1  # ELU
        conv(f"encoder.layers.{idx}", dim, dim * 2, ratio * 2)
        idx += 1
        scale *= 2
    idx += 1  # ELU
    conv(f"encoder.layers.{idx}", scale * nf, c["hidden_size"], c["last_kernel_size"])
    transformer("encoder_transformer")
    h, k = c["hidden_size"], resample_kernel(c)
    conv("downsample", h, h, k, bias=False)
    conv_t("upsample", h, h, k, 2, c["upsample_groups"], bias=False)
    transformer("decoder_transformer")
    idx, scale = 0, 1 << len(ratios)
    conv(f"decoder.layers.{idx}", h, scale * nf, c["kernel_size"])
    idx += 1
    for ratio in ratios:
        dim = scale * nf
        idx += 1  # ELU
        conv_t(f"decoder.layers.{idx}", dim, dim // 2, ratio * 2, ratio, 1)
        idx += 1
        for _ in range(c.get("num_residual_layers", 1)):
            resnet(f"decoder.layers.{idx}", dim // 2)
            idx += 1
        scale //= 2
    idx += 1  # ELU
    conv(f"decoder.layers.{idx}", nf, c.get("audio_channels", 1), c["last_kernel_size"], gain=0.3)
    sem = c.get("num_semantic_quantizers", 1)
    quantizer("quantizer.semantic_residual_vector_quantizer", sem)
    quantizer("quantizer.acoustic_residual_vector_quantizer", c["num_quantizers"] - sem)
    return out


def initial_values(layout, generator):
    """{name: float32 tensor} drawn from a seeded torch.Generator in layout order."""
    import torch

    values = {}
    for name, shape, init in layout:
        if init[0] == "normal":
            values[name] = torch.randn(shape, generator=generator) * init[1]
        elif init[0] == "ones":
            values[name] = torch.ones(shape)
        elif init[0] == "zeros":
            values[name] = torch.zeros(shape)
        else:
            values[name] = torch.full(shape, float(init[1]))
    return values
