import sys

from ahpd.demo_agent.cli import main

sys.exit(main())
