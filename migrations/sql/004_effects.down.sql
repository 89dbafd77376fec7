DROP TABLE effects;
DROP SEQUENCE effects_batch_seq;
