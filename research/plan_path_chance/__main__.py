from research.plan_path_chance.chance import main

main()
