# The two commands of the README. Both set up what they need first.
.PHONY: demo test setup
demo:   ## set up, then run the example sweep end to end (train, fit, report)
	bash scripts/demo.sh
test:   ## set up, then run the whole test suite (PostgreSQL and Chromium included)
	bash scripts/test.sh
setup:  ## only create .venv with the right torch and the package
	bash scripts/setup.sh
