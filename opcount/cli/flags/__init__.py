"""The command's flag groups on the LLM path, one module each: :mod:`.llm` (phases, dtypes, sweeps, kernels),
:mod:`.deploy` (a parallel layout, price, capacity) and :mod:`.training` (``--mode train``'s optimizer,
recomputation, ZeRO, tokens). Each adds its arguments to the parser, makes them into its typed options group
(:mod:`opcount.cli.options`) with every default resolved, and refuses what it can before anything is built;
:mod:`opcount.cli.parser` composes them. None of them imports a module that builds, traces or renders."""
