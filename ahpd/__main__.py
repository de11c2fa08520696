import sys

from ahpd.cli import main

sys.exit(main())
