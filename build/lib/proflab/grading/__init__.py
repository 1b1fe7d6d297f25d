"""Where a fix is graded: the four checks of one learner's file, the results compared, the source audit, and a whole class graded with its journal."""
