"""Model definitions for torch_fmnist.py: a copy of ../shared/bench's, plus
ResNet8, layer for layer examples/resnet8.cfg."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    # conv5x5x6 pad2 relu pool2 / conv5x5x16 relu pool2 / fc120 relu / fc84 relu / fc10
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1 = nn.Linear(16 * 5 * 5, 120)
        self.f2 = nn.Linear(120, 84)
        self.f3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.f1(x))
        x = F.relu(self.f2(x))
        return self.f3(x)


class SeedCNN(nn.Module):
    # Keras MNIST CNN (Dist-Keras blog): conv3x3x32 relu / conv3x3x32 relu /
    # maxpool2 / flatten 4608 / fc225 relu / fc10  -> 1,048,853 params
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 3)
        self.c2 = nn.Conv2d(32, 32, 3)
        self.f1 = nn.Linear(12 * 12 * 32, 225)
        self.f2 = nn.Linear(225, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.f1(x))
        return self.f2(x)


def conv_bn(cin, cout, stride=1):
    # [conv] size 3 pad 1 batch_normalize 1: no bias (batch norm's beta is it);
    # batch norm as ragtag's: eps 1e-5, momentum 0.1
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1))


class ResNet8(nn.Module):
    # examples/resnet8.cfg: stem conv16; three stages (16, 32 stride 2, 64
    # stride 2) of conv-bn-relu, conv-bn-relu, conv-bn, then relu(that +
    # the stage's first conv output) ([shortcut] from = -3); global average
    # pool; dense 10. 121,274 trainable parameters, as `ragtag summary` counts.
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(1, 16)
        self.s1 = nn.ModuleList([conv_bn(16, 16), conv_bn(16, 16)])
        self.d2 = conv_bn(16, 32, 2)
        self.s2 = nn.ModuleList([conv_bn(32, 32), conv_bn(32, 32)])
        self.d3 = conv_bn(32, 64, 2)
        self.s3 = nn.ModuleList([conv_bn(64, 64), conv_bn(64, 64)])
        self.fc = nn.Linear(64, 10)

    @staticmethod
    def stage(x, convs):
        h = F.relu(convs[0](x))
        return F.relu(convs[1](h) + x)

    def forward(self, x):
        x = F.relu(self.stem(x))          # layer 1
        x = self.stage(x, self.s1)        # layers 2-4
        x = F.relu(self.d2(x))            # layer 5
        x = self.stage(x, self.s2)        # layers 6-8
        x = F.relu(self.d3(x))            # layer 9
        x = self.stage(x, self.s3)        # layers 10-12
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


MODELS = {"lenet": LeNet, "seedcnn": SeedCNN, "resnet8": ResNet8}


def blas_lib():
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({l.split()[-1] for l in f if "blas" in l})
        return ",".join(os.path.basename(x) for x in libs)
    except OSError:
        return "?"


def evaluate(model, x, y, bs=256):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], bs):
            out = model(x[i:i + bs])
            correct += int((out.argmax(1) == y[i:i + bs]).sum())
    model.train()
    return correct / x.shape[0]
