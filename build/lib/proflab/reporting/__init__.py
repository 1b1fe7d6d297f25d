"""Where a verdict is shown: the terminal and JSON report, a class's JSON, JUnit and Gradescope files, and TensorBoard summaries and charts."""
