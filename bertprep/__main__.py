"""python -m bertprep"""
from bertprep.cli import main

main()
