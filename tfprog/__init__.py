"""tfprog: builds the TF side: FunctionDefs for TF parts, channel queues, the sink program."""
