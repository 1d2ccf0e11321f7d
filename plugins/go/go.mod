module kubewasm/plugins

go 1.24
