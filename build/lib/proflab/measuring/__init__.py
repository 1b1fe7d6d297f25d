"""Where what a run left is measured: step times into statistics, traces into evidence, the operator table, where a step's time went, and the answers of lab 0."""
