"""Reading results: the data contract, the sink, the SQL over a results folder, the answer and the report."""
