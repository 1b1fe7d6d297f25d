"""Lab 8, a learner's fix: the model scripted, frozen and optimized for inference by TorchScript.

torch.jit.optimize_for_inference freezes a scripted model (its weights become constants), folds every
batch norm into the convolution before it, and hands the convolutions to the CPU's own library, prepacked
once: the trace holds other operators than aten::convolution, doing the same work."""

import torch

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = torch.jit.optimize_for_inference(torch.jit.script(ServingNet().to(cfg.device)))

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            yield {"logits": model(images).cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
