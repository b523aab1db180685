import torch


def robust_loss(residual):
    # quadratic near zero, square root in the tails
    small = (residual.abs() < 1).float()
    return (small * residual ** 2 + (1 - small) * residual.abs() ** 0.5).mean()


def penalised(model, x, y):
    pred = model(x)
    return robust_loss(pred - y)
