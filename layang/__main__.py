from layang.cli import main

main()
