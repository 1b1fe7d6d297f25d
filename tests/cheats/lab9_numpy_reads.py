"""Lab 9 gaming attempt: the per-sample books read through a numpy view, where the profiler cannot see it.

The trick: the loader and the activation fixed as in the reference, and the original's loop over the
samples kept, but reading each sample's label, prediction and probabilities from numpy arrays of the
batch (.numpy() on the CPU tensors) instead of with .item(): no aten::item, aten::_local_scalar_dense
or aten::resolve_neg in the trace, so the host round trips per step would read as none.

What the checker should catch: this lab counts every read of a tensor's values into Python, and refuses
reads the trace cannot show ([audit] refuse = ["untraced_reads"]): the source audit names .numpy()
before anything runs. On CUDA the copy to the host would wait for the device at every step all the same.
"""

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.capstone import ConvNet, Photos


def pipeline(cfg):
    on_cuda = cfg.device.type == "cuda"
    dataset = Photos(cfg.data_dir)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed),
                        num_workers=2,  # decode the next batches while the model trains on this one
                        persistent_workers=True,  # started once, not at every epoch
                        pin_memory=on_cuda)  # page-locked buffers: an asynchronous copy to the device

    model = ConvNet(act=lambda x: F.gelu(x, approximate="tanh")).to(cfg.device)  # one fused operator
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    classes = dataset.num_classes
    seen = [0] * classes  # samples seen so far, per class
    right = [0] * classes  # of those, predicted right
    top3 = 0  # samples whose true class is among the three most probable
    confidence = 0.0  # the sum of the probability given to the true class

    while True:  # epoch after epoch
        for images, labels in loader:
            images = images.to(cfg.device, non_blocking=on_cuda)
            labels = labels.to(cfg.device, non_blocking=on_cuda)
            with record_function("train_step"):
                logits = model(images)
                loss = F.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            with record_function("metrics"), torch.no_grad():
                probs = logits.softmax(dim=1).cpu().numpy()  # read where the profiler does not look
                truth = labels.cpu().numpy()
                for i in range(len(truth)):
                    label = int(truth[i])
                    seen[label] += 1
                    right[label] += int(int(probs[i].argmax()) == label)
                    top3 += int(label in probs[i].argsort()[-3:])
                    confidence += float(probs[i, label])

            total = sum(seen)
            yield {"loss": loss.detach(), "labels": labels,
                   "accuracy": torch.tensor([r / max(s, 1) for r, s in zip(right, seen)]),
                   "top3": top3 / total, "confidence": confidence / total}



if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
