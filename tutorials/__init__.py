"""The course: tutorials t1 ... t5 (jupytext pairs) and their tested solutions."""
