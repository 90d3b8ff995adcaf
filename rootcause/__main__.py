import sys

from rootcause.cli import main

sys.exit(main())
