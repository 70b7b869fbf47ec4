"""Published serving measurements against the estimate and the bound, and engine profiles fitted to them:
rows read (:mod:`.rows`), priced (:mod:`.evaluate`) in a steady-state form (:mod:`.steady`), a profile fitted
with its leave-one-out error (:mod:`.fit`)."""
