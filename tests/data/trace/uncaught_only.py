import torch  # noqa: F401 - the tracer starts with torch


def update():
    # an autograd error the tracer did not see raise (as from a C++ extension)
    raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


update()
