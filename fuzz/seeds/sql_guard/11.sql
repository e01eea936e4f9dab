select "name" from `cities` where [country] = 'France' -- comment
