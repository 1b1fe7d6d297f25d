import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN


def train(cfg):
    dataset = PhotoDataset(cfg.data_dir)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(cfg.seed), num_workers=4)
    torch.manual_seed(cfg.seed)
    model = SmallCNN(dataset.num_classes).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for images, labels in loader:
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        yield {"loss": loss, "labels": labels}
