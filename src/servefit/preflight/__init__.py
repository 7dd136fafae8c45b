"""The preflight gate: probes read facts, rules judge them, the gate runs a command only
when every link of driver -> CUDA -> PyTorch -> engine -> model -> plan checks out."""
