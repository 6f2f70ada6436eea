"""The grading engine: running a function on a task's cases and judging it, for the students' feedback
(:func:`~.checking.check`) and for the grade (exercises 01–08).

The middle of grading's three layers (tasks ← engine ← notebooks): it reads the tasks
(:mod:`capsule_lab.grading.tasks`) and knows nothing of notebooks. Inside, each module imports only those above it
in this list:

- :mod:`.records`: one case's result (:class:`~.records.Evaluation`) and its plain-data form, for files;
- :mod:`.refusal`: a task's answers refused (their code replaced by one that raises :class:`~.refusal.AnswerRefused`);
- :mod:`.lock`: deny by default — while the student's function runs, nothing of the package runs but what its
  task allows;
- :mod:`.signing`: the instructor's key and the MACs on reports and on the grader's cache;
- :mod:`.reference_cache`: the reference answers of each task kept on disk (the grader's own, signed);
- :mod:`.running`: running the reference and the student's function on a task's cases;
- :mod:`.hidden`: the cases ``grade`` draws for each notebook from the instructor's key;
- :mod:`.judging`: the verdict (passed, wrong, error, refused, with the hint) and partial credit;
- :mod:`.checking`: :func:`~.checking.check`, the students' feedback, and the stand-ins that let a task count on its
  own;
- :mod:`.processes`: starting and killing the processes student code runs in, under memory and CPU-time limits;
- :mod:`.sandbox`: the OS sandbox (bubblewrap, a seccomp filter) the kernel and the evaluation child start in;
- :mod:`.evaluation`: scoring a notebook's functions in a child process the grader owns;
- :mod:`.child`: that child process.
"""
