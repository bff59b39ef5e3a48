"""The pure rules of flows: the step graph (:mod:`.dag`), the definition stored with each
execution (:mod:`.spec`) and the decisions storage applies (:mod:`.decide`)."""
