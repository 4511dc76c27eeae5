"""The grader of the classroom exercises in ``tutorials/``.

- ``exercises``: the exercises, in course order (folder, files, solution, checks, how
  the TUI runs them); ``student_folder``: where a student's work is, loading it, and
  ``block_manager_class``, that work as a drop-in ``BlockManager``;
- ``grading``: ``grade(number, path, solution, limits)`` -> ``Report``, each criterion run where
  it can run (a child process under time and memory limits, the CUDA simulator, or a GPU),
  judged here;
- ``child``: the grading child, which runs a student's code and answers with what it returned;
  ``library_imports``: the library's modules a student's files name, loaded before their
  timed import;
- ``remote`` and ``proxies``: starting, asking and ending a child, and stand-ins for the
  objects it keeps, so that the checks run here, unchanged; ``child_errors``: what a request
  raises when no answer comes;
- ``wire``: what crosses between them: length-prefixed JSON (``frames``), strictly read;
- ``delegation``: keeping the library's own solution out of a student's reach (and out of a
  grading child's memory; ``holders``: every place the library holds what it replaces);
  ``library_copies``: a copy of it in their folder or code;
- ``confinement``: Landlock, where Linux offers it;
- ``report``: criteria, results, the printed and the JSON report;
- ``student``: a student's files, or the library modules that solve an exercise;
- ``ex01_block_table``, ``ex02_allocator``, ...: each exercise's checks (``CRITERIA``), with
  what they read besides (``recorded_runs/``: the engine runs exercise 13 measures);
- ``properties`` and ``program_steps``: random programs against a block manager, one request
  a step, and the reference properties;
- ``bug_zoo`` and ``broken_states``: broken block managers and hand-built broken states that
  exercise 06's properties must catch (and the sound states those were made from, on which
  they must hold); ``disguise``: how each state they judge is hidden, anew at each grading;
- ``shared_memory_races``: watching the CUDA simulator's shared memory for races;
- ``reduction_kernels``: the kernels exercise 10's checks launch on a student's reduction;
- ``student_run``: a student's block manager run on the model in a grading child, as a trace
  the TUI replays (the TUI's one way into the grader), and ``witness``, the events their
  code leaves out, derived from what it returned;
- ``time_limit`` and ``criterion_clock``: stopping a criterion that runs too long, its time
  the student's code's, not the machine's load nor the grader's own work;
- ``command``: ``minipaged exercises list | init | check``.

``tutorials`` here links to the repository's ``tutorials/``, so that the READMEs and starter
files ship as package data (``minipaged exercises init``).
"""
