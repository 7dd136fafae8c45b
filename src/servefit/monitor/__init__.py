"""GPU monitoring during a benchmark (NVML), for the report's diagnosis."""
