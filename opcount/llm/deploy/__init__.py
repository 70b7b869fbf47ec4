"""A phase on a parallel layout (tensor, pipeline, expert and data parallelism): what each device holds and
runs, the collectives between devices, whether it fits, its time and its cost."""
