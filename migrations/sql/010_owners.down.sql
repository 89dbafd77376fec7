DROP TABLE owners;
