-- Included by resume.lua on a Redis Cluster only (`-- #cluster`): the pause version moves
-- with every removed pause (the queues' homes are then swept with it).
ret = redis.call('INCR', P .. ':pv')
