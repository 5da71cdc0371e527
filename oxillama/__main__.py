import sys

from oxillama.cli import main

sys.exit(main())
