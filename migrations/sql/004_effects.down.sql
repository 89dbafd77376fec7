DROP TABLE effects;
