"""End to end: train the same small CNN for one epoch on a Fashion-MNIST subset
(6000 train / 1000 test, 28x28 grey PNGs) fed by chute and by torch's DataLoader.

Same seed, same model initialisation, same preprocessing (28x28, x/255,
normalised with the dataset's mean/std).  The DataLoader is given the very
sample order chute produced (read back with return_indices), so the two runs
differ only in who decoded and batched the pixels: their test accuracies
must agree within 1.5 points, and both must be far above chance (10%).  A
third run with the DataLoader's own shuffle shows the result does not hinge
on chute's order.  Runs in about 20 s on 2 CPU cores.
"""
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import chute

torchvision = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "python", "tools", "fashion_mnist_to_folder.py")
SRC = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's pixel statistics


@pytest.fixture(scope="module")
def fmnist(tmp_path_factory):
    if not os.path.exists(os.path.join(SRC, "train-images-idx3-ubyte.gz")):
        pytest.skip("Fashion-MNIST not found in %s (apt install dataset-fashion-mnist)" % SRC)
    out = str(tmp_path_factory.mktemp("fmnist"))
    subprocess.run([sys.executable, TOOL, out, "--src", SRC, "--train", "6000", "--test", "1000"],
                   check=True, capture_output=True)
    return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = x[:, :1]  # grey images arrive as 3 equal channels from both pipelines
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def train_and_test(train_batches, test_batches):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for x, y in train_batches:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in test_batches:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    return 100.0 * correct / total, total


class FixedOrder(torch.utils.data.Sampler):
    def __init__(self, order):
        self.order = list(order)

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


def test_one_epoch_chute_vs_dataloader(fmnist):
    kw = dict(size=28, transform="none", mean=(MEAN,) * 3, std=(STD,) * 3)
    train = chute.Loader(os.path.join(fmnist, "train"), batch_size=64, shuffle=True, seed=0,
                         drop_last=False, return_indices=True, **kw)
    test = chute.Loader(os.path.join(fmnist, "test"), batch_size=256, shuffle=False,
                        drop_last=False, **kw)
    order = []

    def chute_train():
        for x, y, idx in train:
            order.extend(idx.tolist())
            yield x, y

    t0 = time.monotonic()
    acc_chute, n_test = train_and_test(chute_train(), test)
    t_chute = time.monotonic() - t0
    assert sorted(order) == list(range(6000)) and n_test == 1000

    tf = T.Compose([T.ToTensor(), T.Normalize([MEAN] * 3, [STD] * 3)])
    tv_train = torchvision.datasets.ImageFolder(os.path.join(fmnist, "train"), transform=tf)
    tv_test = torchvision.datasets.ImageFolder(os.path.join(fmnist, "test"), transform=tf)
    assert tv_train.classes == list(train.classes)
    test_dl = torch.utils.data.DataLoader(tv_test, batch_size=256)
    same_order = torch.utils.data.DataLoader(tv_train, batch_size=64, sampler=FixedOrder(order))
    t0 = time.monotonic()
    acc_torch, _ = train_and_test(same_order, test_dl)
    t_torch = time.monotonic() - t0

    g = torch.Generator()
    g.manual_seed(0)
    own_shuffle = torch.utils.data.DataLoader(tv_train, batch_size=64, shuffle=True, generator=g)
    acc_torch_shuffled, _ = train_and_test(own_shuffle, test_dl)

    print("\nFashion-MNIST 6000/1000, 1 epoch: chute %.1f%% (%.1f s), DataLoader same order "
          "%.1f%% (%.1f s), DataLoader own shuffle %.1f%%"
          % (acc_chute, t_chute, acc_torch, t_torch, acc_torch_shuffled))
    assert acc_chute > 70 and acc_torch > 70 and acc_torch_shuffled > 70
    assert abs(acc_chute - acc_torch) <= 1.5
