"""Train a ResNet-18 on generated images (torchvision's FakeData)."""
import argparse

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--decode-in-loop", action="store_true", help="decode and augment in this process")
args = parser.parse_args()

torch.manual_seed(0)
augment = transforms.Compose([
    transforms.GaussianBlur(11, sigma=3.0),
    transforms.RandomResizedCrop(32, antialias=True),
    transforms.ToTensor(),
    transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
])
size = args.batch_size * args.steps
if args.decode_in_loop:
    data = torchvision.datasets.FakeData(size=size, image_size=(3, 384, 384), num_classes=10, transform=augment)
else:  # decoded once, before training
    images = torch.randn(size, 3, 32, 32)
    labels = torch.randint(0, 10, (size,))
    data = torch.utils.data.TensorDataset(images, labels)
loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=0)

model = torchvision.models.resnet18(num_classes=10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
model.train()
for images, labels in loader:
    loss = loss_fn(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"trained {len(loader)} steps, last loss {loss.item():.3f}")
