"""`python -m proxy replay`: conversations replayed turn by turn through the pipeline (`runner`),
the figures that are pure functions of the histories (`metrics`: prefix reuse, recall, cache cost,
latency), the simulated summariser and the record of its requests (`simulation`), the report and
charts (`report`), the command line (`cli`); `--live` (`live`: the turns sent to a real model raw
and through the proxy, `live_compare`, `live_journal`, `live_report`)."""
