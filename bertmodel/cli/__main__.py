"""`python -m bertmodel.cli pretrain ...`, as torchrun starts each rank."""
from bertmodel.cli import main

if __name__ == "__main__":
    main()
