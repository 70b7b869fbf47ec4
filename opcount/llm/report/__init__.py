"""What a traced phase's report shows beyond the analyses' own columns: the estimate's time split over
modules and operators (the LLM table's time columns, ``--by-operator``), and the LLM chart."""
