"""Deployment planning over served traffic: the configurations searched (their layouts, hardware and pools),
each simulated (:mod:`opcount.llm.serve`), priced and ranked, and the throughput-interactivity frontier
(docs/plan.md)."""
