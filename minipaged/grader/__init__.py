"""The grader of the classroom exercises in ``tutorials/``.

- ``exercises``: the nine exercises (folder, files, solution, checks), loading the work to
  grade, and ``block_manager_class``, a student's work as a drop-in ``BlockManager``;
- ``grading``: ``grade(number, path, solution)`` -> ``Report``, each criterion run where it
  can run (here, in the CUDA simulator, or on a GPU);
- ``report``: criteria, results, the printed and the JSON report;
- ``student``: a student's files, or the library modules that solve an exercise;
- ``ex01_block_table`` ... ``ex09_prefix_cache``: each exercise's checks (``CRITERIA``);
- ``properties``: random programs against a block manager, and the reference properties;
- ``bug_zoo``: broken block managers that exercise 08's properties must catch;
- ``time_limit``: stopping student code that runs too long;
- ``command``: ``minipaged exercises list | check``.
"""
