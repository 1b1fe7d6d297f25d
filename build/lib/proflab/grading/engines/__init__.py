"""Where a class is graded on the engines instructors already use: Gradescope and Classroom 50 (and a plain
GitHub Actions workflow in a learner's own repository, as feedback).

* ``gradescope``: ``proflab autograder gradescope`` writes the autograder.zip an
  instructor uploads (its ``setup.sh``, ``run_autograder`` and README, and the
  kit itself, pinned), and ``proflab autograder run`` is what its
  ``run_autograder`` calls for every submission, in Gradescope's container.
* ``classroom``: ``proflab autograder classroom`` writes the workflow a GitHub
  Classroom assignment runs on every push of a learner's repository.
* ``merge``: ``proflab grade --merge`` reads what those engines produce
  (Gradescope's results.json, CI's JUnit) back into the class table.
"""
