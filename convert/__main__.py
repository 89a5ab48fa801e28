from dpconvert.cli import main

main()
