"""`python -m proxy replay`: conversations replayed turn by turn through the pipeline (`runner`),
the report and charts (`report`), the command line (`cli`)."""
