-- Rolling back forgets every generation but the live ones' tables and gate
-- rows, which stay where they are: with their generation's key in the gate
-- rows and their schema, unused by processors that no longer know about
-- generations. Drop the other generations first (inorder rebuild drop).
DROP TABLE generation_epoch;
DROP TABLE generations;
