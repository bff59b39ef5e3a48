"""Flow steps as the application declares them and the worker runs them: flow files
(:mod:`.files`, :mod:`.schema`), the jobs of an execution's steps (:mod:`.jobs`), a code
step's call (:mod:`.calls`), and the steps a worker runs from the stored definition --
``type: script`` (:mod:`.script`) and ``type: http`` (:mod:`.http`), with their templates
(:mod:`.templates`), what a worker allows (:mod:`.gate`) and one attempt of either
(:mod:`.run`)."""
