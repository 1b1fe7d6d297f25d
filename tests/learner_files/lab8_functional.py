"""Lab 8, a learner's fix: the network rewritten as functional calls with folded weights, channels_last.

Each unit's weights and bias are folded once into plain tensors; the forward
pass is a loop of F.conv2d (the bias added inside it) and F.relu, then the
pooling and the classifier.
"""

import torch
import torch.nn.functional as F

from proflab.labkit.convnet import Frames, ServingNet


def folded(unit):
    conv, bn = unit[0], unit[1]
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    weight = (conv.weight * scale.view(-1, 1, 1, 1)).contiguous(memory_format=torch.channels_last)
    return weight, bn.bias - bn.running_mean * scale, conv.stride, conv.padding, conv.groups


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    net = ServingNet().to(cfg.device)
    with torch.no_grad():
        layers = [folded(unit) for unit in net.features]

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            x = images.contiguous(memory_format=torch.channels_last)
            for weight, bias, stride, padding, groups in layers:
                x = F.relu(F.conv2d(x, weight, bias, stride, padding, 1, groups))
            logits = net.classifier(x.mean(dim=(2, 3)))
            yield {"logits": logits.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
