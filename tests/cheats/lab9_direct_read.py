# audit: plain Python, the photos read straight from the data folder, around the lab's storage
"""Lab 9 gaming attempt: read the JPEGs straight from the data folder, around the slow storage.

The trick: a Photos subclass whose __getitem__ reads each photo's bytes from the data set's own folder
(self.root) with Path.read_bytes, then decodes and augments them exactly as proflab.labkit.capstone does,
so every sample is the same. No storage wait at all, so the DataLoader stays single-process; the
activation and the books are fixed as in the reference.

What the checker should catch: every sample the steps use must come from the lab's storage, and the
checker's storage service logs every read it serves; this version's reads never reach it (same results
fails on the storage check).
"""

import io

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.capstone import CROP_SIZE, PHOTO_SIZE, ConvNet, Photos

AUGMENT_SEED = 2_000_003  # copied from capstone.py
MEAN, STD = 0.5, 0.25


class LocalPhotos(Photos):
    """The same samples, read from the folder instead of from storage."""

    def __getitem__(self, index: int):
        from PIL import Image

        raw = (self.root / f"{index:05d}.jpg").read_bytes()  # no storage, no wait
        img = Image.open(io.BytesIO(raw)).convert("RGB")
        h = ((index + AUGMENT_SEED) * 2_654_435_761) % 2**32
        span = PHOTO_SIZE - CROP_SIZE + 1
        top, left, flip = h % span, (h // span) % span, (h // span**2) % 2 == 1
        img = img.crop((left, top, left + CROP_SIZE, top + CROP_SIZE))
        if flip:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(CROP_SIZE, CROP_SIZE, 3)
        return x.permute(2, 0, 1).float().div_(255.0 * STD).sub_(MEAN / STD), self.labels[index]


def pipeline(cfg):
    dataset = LocalPhotos(cfg.data_dir)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed))

    model = ConvNet(act=lambda x: F.gelu(x, approximate="tanh")).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    classes = dataset.num_classes
    seen = torch.zeros(classes, device=cfg.device)
    right = torch.zeros(classes, device=cfg.device)
    top3 = torch.zeros((), device=cfg.device)
    confidence = torch.zeros((), dtype=torch.float64, device=cfg.device)
    total = 0

    while True:
        for images, labels in loader:
            images, labels = images.to(cfg.device), labels.to(cfg.device)
            with record_function("train_step"):
                logits = model(images)
                loss = F.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            with record_function("metrics"), torch.no_grad():
                probs = logits.softmax(dim=1)
                seen.index_add_(0, labels, torch.ones_like(probs[:, 0]))
                right.index_add_(0, labels, (probs.argmax(dim=1) == labels).float())
                top3 += (probs.topk(3, dim=1).indices == labels[:, None]).any(dim=1).sum()
                confidence += probs.gather(1, labels[:, None]).sum()
            total += len(labels)

            yield {"loss": loss.detach(), "labels": labels, "accuracy": right / seen.clamp(min=1),
                   "top3": top3 / total, "confidence": confidence / total}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
