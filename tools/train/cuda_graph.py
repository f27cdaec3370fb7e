"""A training step captured as a CUDA graph and replayed (docs/training.md).

The codec's step is a few thousand small kernels: on the H200 about 40 ms of a 61 ms step at
batch 64 is fixed cost (train.py bench), the host issuing kernels. A graph issues them all at
once. `GraphedStep(fn)` calls fn(key, inputs) -> {name: tensor}: the first `warmup` calls of each
key run eagerly on a side stream (PyTorch's recipe: libraries initialise, optimizers create their
state), the next one is captured (the graph's inputs are copies of that call's inputs) and
replayed, and every later call copies its inputs into the captured ones and replays. The returned
tensors are the graph's own outputs: read them (a host read) only when needed. fn must do no host
reads, no host-to-device copies and no data-dependent shapes; the gradients are set to None
before the capture so that backward() allocates them in the graph's pool.

If the capture fails, the reason is printed once and every later call runs eagerly: a training
chunk never dies of it."""

import torch


class GraphedStep:
    def __init__(self, fn, optimizers, warmup=3):
        self.fn, self.optimizers, self.warmup = fn, optimizers, warmup
        self.graphs, self.calls = {}, {}
        self.failed = None

    def _eager(self, key, inputs):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = self.fn(key, {n: t.to("cuda", non_blocking=True) for n, t in inputs.items()})
        torch.cuda.current_stream().wait_stream(side)
        return out

    def __call__(self, key, inputs):
        """inputs: {name: tensor} (host tensors are copied in; pinned ones asynchronously)."""
        if key in self.graphs:
            graph, static, out = self.graphs[key]
            for n, t in inputs.items():
                static[n].copy_(t, non_blocking=True)
            graph.replay()
            return out
        if self.failed is not None:
            return self.fn(key, {n: t.to("cuda") for n, t in inputs.items()})
        seen = self.calls.get(key, 0)
        self.calls[key] = seen + 1
        if seen < self.warmup:
            return self._eager(key, inputs)
        static = {n: t.to("cuda").clone() for n, t in inputs.items()}
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the eager calls' cached blocks: the graph gets its own pool
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = self.fn(key, static)
        except Exception as error:  # noqa: BLE001 (any failure: go on eagerly, say why once)
            self.failed = f"{type(error).__name__}: {error}"
            print(f"cuda graph: capture of step {key!r} failed, eager from here ({self.failed})", flush=True)
            torch.cuda.synchronize()
            return self.fn(key, {n: t.to("cuda") for n, t in inputs.items()})
        self.graphs[key] = (graph, static, out)
        print(f"cuda graph: step {key!r} captured", flush=True)
        graph.replay()
        return out

    def drop(self, key):
        """Frees key's graph and, once its outputs are no longer held, its memory pool: for a step
        that will not come again (the codec's step without the discriminator once adv_start is
        past), so that processes sharing the GPU (tools/train/compare-codecs.sh) get the memory."""
        if self.graphs.pop(key, None) is not None:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
