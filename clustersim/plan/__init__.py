"""The planner: search space, analytic screen, goodput bisection, executors, comparison."""
