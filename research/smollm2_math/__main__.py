from research.smollm2_math.study import main

main()
