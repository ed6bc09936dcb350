"""Where experience comes from and how it is read: envs (`envs`), demo files of every format (`demos`),
and experts that record demos (`experts`)."""
