"""``servefit calibrate``: measure the machine you have (PyTorch microbenchmarks and a
synthetic stack of the model's layers) and fit the performance model to it."""
